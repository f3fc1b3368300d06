"""L1 extraction: pending L0 turns → candidate atoms, in the order the data flows:
prefilter (no model for greetings and thanks) → prompt → the model → parse (any reply to raw
atoms) → normalize (subject, kind, sentiment, time) → ground (drop what the turn never said),
orchestrated per turn by extract and per batch of turns by pipeline."""
