"""The one list scheduler and the one order walker every timing path goes through."""
