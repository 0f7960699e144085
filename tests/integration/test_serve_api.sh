#!/usr/bin/env bash
# weft serve end to end with the official openai SDK: completions, chat, streaming, usage, stop,
# seeds, logprobs, /v1/score against the HF reference, tokenize, typed errors, a table of hostile
# requests, auth, client disconnects and the SIGTERM drain (tests/integration/serve/).
source "$(dirname "$0")/serve_setup.sh" "$1"
cd "$(dirname "$0")/serve"
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 exec "$WEFT_PY" -m pytest -q -x -p no:cacheprovider test_api.py test_hostile.py test_lifecycle.py
