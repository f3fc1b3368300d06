"""The exceptions memdb raises: one family under MemdbError, each message saying what to do."""


class MemdbError(Exception):
    """Base class of every error memdb raises."""


class InvalidInput(MemdbError, ValueError):
    """An argument or message does not have the shape memdb needs."""


class SchemaError(MemdbError):
    """The file is not a memdb file, or was written by a newer memdb."""


class EmbedderMismatch(MemdbError):
    """The file's vectors were made by an embedder of another dimension."""


class EmbedderUnavailable(MemdbError):
    """The embedding model could not be loaded."""


class ModelError(MemdbError):
    """The extraction model could not be found, verified or loaded."""


class NotFound(MemdbError, KeyError):
    """No atom or turn has that id for that user."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the sentence readable
        return str(self.args[0]) if self.args else ""


class SearchError(MemdbError):
    """Both sides of a search failed (raised only with strict=True)."""
