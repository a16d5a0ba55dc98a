__version__ = "0.1.0"

# The transformers release whose chat_parsing interpreter the generated parsers reproduce: its
# events, messages and exception classes are the reference (see README, "Semantics").
INTERPRETER_RELEASE = "5.25.0"
