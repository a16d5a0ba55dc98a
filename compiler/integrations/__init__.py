"""Where rtcompile meets the programs that serve and consume model output. One module or package per
host, each importing its host lazily and depending only on rtcompile's public API and runtime:

    openai_stream.py   OpenAI `chat.completion.chunk` deltas from any parser's events
    serving_common.py  what the inference-server plugins share (template resolution, routed chunks)
    vllm/              the vLLM parser plugin (`--reasoning-parser rtcompile --tool-call-parser rtcompile`)
    sglang.py          the SGLang detector plugin (same flags)
    transformers/      tokenizers that parse with compiled parsers, and `transformers serve`

Nothing in the compiler stages or the runtime imports this package.
"""
