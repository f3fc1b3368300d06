"""Invented chats that both a test and a bench read (tests/test_context_block.py,
bench/context_floor.py): one copy, so the bench measures what the test checks."""

# A new user's first session: facts, a partner, and assistant pleasantries that sit close to
# every query in e5's space.
TURNS = [
    ("user", "Hi! I'm Signe, I lead the data platform team."),
    ("assistant", "Nice to meet you, Signe!"),
    ("user", "We are migrating our pipelines from Airflow to Dagster this quarter."),
    ("assistant", "Noted! Anything else?"),
    ("user", "I'm vegetarian and allergic to peanuts."),
    ("assistant", "加油！"),
    ("user", "My partner Tomas loves spicy Thai food."),
    ("user", "Our warehouse is Snowflake, and dbt runs the transformations."),
    ("assistant", "Got it, I'll keep that in mind."),
    ("user", "I live in Rotterdam."),
    ("user", "I run 10k every Sunday morning."),
    ("assistant", "That's great, keep it up!"),
    ("user", "The on-call rotation changes every Monday."),
]
