"""Adapters to agent frameworks, each an optional extra imported only when used."""
