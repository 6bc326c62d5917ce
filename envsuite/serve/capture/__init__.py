"""Capture over HTTP: an OpenAI call under ``/capture/<set>/...`` is placed in an episode and recorded
with its exact token ids (``_requests``), and the capture sets' routes (``_routes``). The store and the
training side are ``envsuite.capture``. Nothing is imported here (the OpenAI routes use ``_requests``)."""
