"""OpenAI's API (``/v1`` and ``/oai/api/v1``: ``/chat/completions``, ``/completions``, ``/models``) for
any checkpoint: the wire format and what is honoured (``_wire``), chat rendering and tool calls
(``_chat``), structured outputs (``_structured``), sampling (``_sampling``), model lookup (``_models``),
what the routes share (``_http``) and the routes (``_chat_route``, ``_completions_route``, ``_routes``).
Nothing is imported here: capture's modules use the chat format before the routes exist."""
