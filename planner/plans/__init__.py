"""A plan as a file: writing, reading, exporting and describing what the planner chose."""
