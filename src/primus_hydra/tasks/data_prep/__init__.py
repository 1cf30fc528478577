"""task=prepare_data's parts, in the order a corpus goes through them: `inputs` (which files, in which format, read
as a stream of records), `tokenizer` (byte, Hugging Face or sentencepiece, loaded in each worker), `encode` (a chunk
of records as token ids, in a worker), `outputs` (the file names, the stats file, whether a run is up to date),
`checks` (everything that can be wrong before the first document, one line each), `progress`, and `write` (the
pipeline: records in order through the workers into megatron-core's IndexedDatasetBuilder, renamed into place).
"""
