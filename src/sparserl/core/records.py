"""The problem record every task source produces (procedural tasks, hub datasets, benchmark files):
one row per problem with these columns, in this order."""

RECORD_COLUMNS = ("id", "problem", "answer", "source")
