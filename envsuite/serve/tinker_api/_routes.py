"""Every router of the Tinker API, in the order the app includes them."""

from envsuite.serve.tinker_api._rest import router as rest_router
from envsuite.serve.tinker_api._sampling import router as sampling_router
from envsuite.serve.tinker_api._service import router as service_router
from envsuite.serve.tinker_api._training import router as training_router

ROUTERS = (service_router, training_router, sampling_router, rest_router)
