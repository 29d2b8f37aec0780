"""An HTTP front end for speech: OpenAI's `/v1/audio/speech` over one loaded preset (`openai_api`), with a
bounded queue in front of the decoder (`service`). Like the app and the command line, nothing in the library
imports it; `python -m ssd_demo serve` runs it."""
