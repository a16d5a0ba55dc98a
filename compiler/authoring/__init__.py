"""Template authoring: prove a response template against a model's chat template (`verify.py`), derive
one from the chat template alone (`infer.py`), and render untrusted chat templates in a sandbox
(`chat_render.py`). Used by `python -m rtcompile verify` and `infer`; needs the `verify` extra."""
