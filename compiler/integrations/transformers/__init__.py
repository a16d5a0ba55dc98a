"""transformers: tokenizers that parse with compiled parsers (`tokenizers.py`: `rtcompile.accelerate`,
`rtcompile.for_tokenizer`) and `transformers serve` on compiled parsers (`serve.py`)."""
