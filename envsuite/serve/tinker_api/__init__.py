"""The Tinker service's HTTP API (``/api/v1/...``), as the real ``tinker`` SDK calls it: sessions and
service calls (``_service``), training (``_training``), sampling (``_sampling``), the REST listing of runs
and checkpoints (``_rest``), and the SDK's protobuf wire format (``_wire``). ``_routes.ROUTERS`` lists
the routes for the app; nothing is imported here, so the server state can read the wire format first."""
