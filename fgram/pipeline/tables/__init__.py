"""Readers of fgram's outputs: the f-gram index and its lookups (`index`), the embedding
store (`embed`), training tags (`tags`), coverage of held-out shards (`coverage`), a
refresh folder's versions (`versions`) and the difference of two tables (`diff`)."""
