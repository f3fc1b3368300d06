"""Retrieval: what the query asks (query), the one SQL statement that fuses keywords and
vectors of atoms and turns (fusion), and the prompt-ready block (context)."""
