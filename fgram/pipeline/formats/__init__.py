"""What fgram reads and writes as token files: token shards, each format two objects
behind `base.ShardFormat` (its reading) and `base.TagFiles` (its tags, in a
`layouts.TagLayout`), registered in `registry`; input discovery and planning (`inputs`),
reading a unit as a token stream (`reading`), the checks of a flat file's sample
(`guards`), what a file's name says it holds (`names`), the table's Parquet schema and
writer (`table`), and generated corpora (`synth`). Text, tokenizers and the shards
`fgram tokenize` writes (`text.token_shards.TokenWriter`) are in `pipeline/text`."""
