"""Commands without UI: sweep, profile, explain, doctor."""
