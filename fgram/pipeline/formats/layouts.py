"""The layouts a tags output can have (`fgram annotate --layout`): a plain dict, read by the
command line's options without importing the formats themselves."""

# how a tags output lays out its files (`fgram annotate --layout`), for the trainer that reads them
LAYOUTS: dict[str, str] = {
    "fgram": "fgram's own: .npy sidecars of flat files, a Parquet file per unit of row formats",
    "olmo": "raw headerless <stem>.fgid.bin (int32) and <stem>.mlen.bin (uint8) beside each "
    "flat token file, of its length (OLMo-core's memmaps; flat, Megatron, datatrove inputs)",
    "megatron": "a sibling IndexedDataset per Megatron input: <prefix>.fgid.bin/.idx (int32) "
    "and <prefix>.mlen.bin/.idx (uint8), the input's sequence lengths and documents",
    "hf": "Parquet a Hugging Face `datasets` loads: input_ids, fgram_ids and match_len "
    "lists per row, the input's other columns kept (Parquet, Arrow, MDS, LitData inputs)",
}
