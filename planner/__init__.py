"""Obscura planner: profiles, memory/time model, recompute IP, partition adjustment."""
