"""Samplers: from prompts to verified rollout batches (i.i.d. groups here; resets and revisions build on it)."""
