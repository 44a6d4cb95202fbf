"""One error root, branched by what the caller can do about it.

* ``ConfigError``    – the caller asked for something invalid: fix the arguments or the config file.
* ``EngineError``    – the local llama-server could not be found, built, started or kept alive.
* ``TransportError`` – a server (engine, gateway, upstream) could not be reached or answered badly.
* ``OutputError``    – the model answered, but the answer is not usable (invalid, truncated, …).

Every error carries a message that says what happened and what to do next, and evidence
(log tail, attempts, last raw output) as attributes.
"""

from __future__ import annotations

from collections.abc import Sequence


class TiankongError(Exception):
    """Root of every error tiankong raises on purpose."""

    #: OpenAI-style ``error.type`` used when the error is sent over HTTP.
    type: str = "tiankong_error"
    #: HTTP status the gateway answers with.
    http_status: int = 500

    #: the request field at fault, when one is (OpenAI's ``error.param``)
    param: str | None = None

    def __init__(self, message: str, *, hint: str | None = None, param: str | None = None) -> None:
        self.message = message
        self.hint = hint
        if param is not None:  # else the class's own (``InvalidMessages.param``)
            self.param = param
        super().__init__(message if not hint else f"{message} — {hint}")

    def one_line(self) -> str:
        """The error as a single line, for CLI output."""
        return " ".join(str(self).split())


# --- config -------------------------------------------------------------------------------------


class ConfigError(TiankongError):
    type = "invalid_request_error"
    http_status = 400


class FlagError(ConfigError):
    """An engine flag combination llama-server would silently mishandle or refuse."""


class ModelNotFound(ConfigError):
    http_status = 404

    def __init__(self, name: str, suggestions: Sequence[str] = (), *, path: bool = False) -> None:
        self.name = name
        self.suggestions = list(suggestions)
        if path:  # a file name that names no file: not a catalog question
            super().__init__(f"no such model file: {name}", hint="check the path (or give a model's name: "
                             "`tiankong models list`)")
            return
        hint = (
            f"did you mean: {', '.join(self.suggestions)}?"
            if self.suggestions
            else "see `tiankong models list` for the catalog and installed models"
        )
        super().__init__(f"unknown model {name!r}", hint=hint)


class ModelNotInstalled(ConfigError):
    http_status = 404

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"model {name!r} is not installed", hint=f"run `tiankong models pull {name}`")


class InvalidModelFile(ConfigError):
    """A file that is not a (complete, uncorrupted) GGUF model."""


class InputTooLong(ConfigError):
    """The input does not fit the engine's context (per slot)."""

    type = "context_length_exceeded"
    http_status = 413


# --- engine -------------------------------------------------------------------------------------


class EngineError(TiankongError):
    type = "engine_error"
    http_status = 503

    def __init__(self, message: str, *, hint: str | None = None, log_tail: str = "") -> None:
        self.log_tail = log_tail
        super().__init__(message, hint=hint)


class EngineNotFound(EngineError):
    pass


class EngineBuildError(EngineError):
    pass


class EngineStartError(EngineError):
    pass


class PortInUse(ConfigError):
    """A configuration error: the port the config or a flag names is taken (nothing about the engine failed)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        super().__init__(
            f"port {port} on {host} is already in use",
            hint="stop the other process, or choose another port (--port, or server.port in the config file)",
        )


# --- transport ----------------------------------------------------------------------------------


class TransportError(TiankongError):
    type = "upstream_error"
    http_status = 502


class Unreachable(TransportError):
    """No connection to the server (refused, no route, a connect timeout): nothing was sent, retrying may help."""


class ServerError(TransportError):
    """The server answered with an HTTP error."""

    def __init__(self, status: int, message: str, *, body: str = "", param: str | None = None) -> None:
        self.status = status
        self.body = body
        # not super(): the remote classes below put another category's __init__ after this one in their MRO
        TiankongError.__init__(self, f"server answered HTTP {status}: {message}", param=param)


# --- output -------------------------------------------------------------------------------------


class OutputError(TiankongError):
    type = "output_error"
    http_status = 422


class InvalidSchema(ConfigError):
    """The schema is not JSON, not a JSON Schema, or not valid against its metaschema."""

    type = "invalid_schema"


class SchemaNotSupported(ConfigError):
    """The schema (or grammar) cannot be enforced; ``pointers`` names every offending location."""

    type = "schema_not_supported"

    def __init__(self, message: str, pointers: Sequence[str] = (), *, hint: str | None = None) -> None:
        self.pointers = list(pointers)
        where = f" at {', '.join(self.pointers)}" if self.pointers else ""
        super().__init__(f"{message}{where}", hint=hint)


class TruncatedOutput(OutputError):
    """The model hit its token budget before the answer was complete (even after a larger retry)."""

    type = "truncated_output"

    HINT = "raise max_tokens, bound the schema (maxLength/maxItems) or shorten the input"

    def __init__(self, message: str, *, attempts: int, last_raw: str, usage: object = None,
                 hint: str = HINT) -> None:
        self.attempts, self.last_raw, self.usage = attempts, last_raw, usage
        super().__init__(message, hint=hint)


class RetriesExhausted(OutputError):
    """Every attempt produced output that does not validate; nothing unvalidated is returned."""

    type = "retries_exhausted"

    def __init__(
        self, message: str, *, attempts: int, last_raw: str, errors: Sequence[str], usage: object = None
    ) -> None:
        self.attempts, self.last_raw, self.errors, self.usage = attempts, last_raw, list(errors), usage
        super().__init__(message, hint="simplify the schema, add instructions or examples, or use a larger model")


# --- a tiankong gateway's typed error, read back by a client ----------------------------------------------------
# A client at a gateway gets the error a local engine would have raised, by what the caller can do: each class is a
# ``ServerError`` (its HTTP status and body, as before) and also the category the gateway's ``error.type`` names, so
# ``except TruncatedOutput`` or ``except ConfigError`` catches it whichever server answered. The evidence a local
# error carries (attempts, the raw output) stays on the gateway: here it is empty.


class _Remote(ServerError):
    """The answer's own status, not a transport failure's 502, when a gateway answers with one of these."""

    def __init__(self, status: int, message: str, *, body: str = "", param: str | None = None) -> None:
        self.http_status = status
        ServerError.__init__(self, status, message, body=body, param=param)


class RemoteConfigError(_Remote, ConfigError):
    """The server refused the request (a 4xx ``invalid_request_error`` …): fix the arguments."""

    type = ConfigError.type


class RemoteOutputError(_Remote, OutputError):
    type = OutputError.type


class RemoteTruncatedOutput(_Remote, TruncatedOutput):
    type = TruncatedOutput.type

    def __init__(self, status: int, message: str, *, body: str = "", param: str | None = None) -> None:
        self.attempts, self.last_raw, self.usage = 0, "", None
        _Remote.__init__(self, status, message, body=body, param=param)


class RemoteRetriesExhausted(_Remote, RetriesExhausted):
    type = RetriesExhausted.type

    def __init__(self, status: int, message: str, *, body: str = "", param: str | None = None) -> None:
        self.attempts, self.last_raw, self.errors, self.usage = 0, "", [], None
        _Remote.__init__(self, status, message, body=body, param=param)


#: a gateway's ``error.type`` → the class a client raises (other types, and 5xx: a plain ``ServerError``)
REMOTE_TYPES: dict[str, type[ServerError]] = {
    "invalid_request_error": RemoteConfigError, "invalid_schema": RemoteConfigError,
    "schema_not_supported": RemoteConfigError, "output_error": RemoteOutputError,
    "truncated_output": RemoteTruncatedOutput, "retries_exhausted": RemoteRetriesExhausted,
}
