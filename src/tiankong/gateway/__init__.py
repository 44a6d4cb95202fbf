"""HTTP gateway (ASGI): OpenAI-compatible routes in front of managed engines."""

from .app import GatewayState, create_app
from .serve import serve

__all__ = ["GatewayState", "create_app", "serve"]
