"""Where rtcompile meets the programs that serve and consume model output. One module or package per
host, each importing its host lazily and depending only on rtcompile's public API and runtime:

    serving/           the serving core: a generation through a compiled parser as operations
                       (text, call started, argument fragment, call done, region failed) that
                       each host renders; the whole output, tools as dicts, reasoning questions;
                       what the inference-server plugins share before a generation (`host`)
    openai_stream.py   OpenAI `chat.completion.chunk` deltas, a renderer of the core
    vllm/              the vLLM parser plugin (`--reasoning-parser rtcompile --tool-call-parser rtcompile`)
    sglang.py          the SGLang detector plugin (same flags)
    transformers/      tokenizers that parse with compiled parsers, and `transformers serve`

Nothing in the compiler stages or the runtime imports this package.
"""
