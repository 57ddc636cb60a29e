"""User-facing errors: one line naming the file, the key and the problem."""


class TirenderError(Exception):
    """Base class of errors that the CLI prints as one line (exit code 2)."""


class ConfigError(TirenderError):
    """A problem in user input: a YAML config, a scene file, a parameter value.

    ``str(err)`` is ``"<file>: <key>: <problem>"`` (parts that are unknown are left out).
    """

    def __init__(self, problem, file=None, key=None):
        self.problem, self.file, self.key = problem, file, key
        parts = [str(p) for p in (file, key) if p not in (None, "")]
        super().__init__(": ".join(parts + [str(problem)]))
