"""L2 and L3, the layers above the atoms, in the order data flows: `store` (scenario and persona
rows; everything a scenario shows derived from its members), `scenarios` (which scenario an
absorbed atom joins, merge, split), `persona` (ranking the card), `search` (the scenarios a
query hits, and the blocks they become in context()); `index` holds a user's scenarios in memory
for placement."""
