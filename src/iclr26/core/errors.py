"""The errors a user can cause. Their message is the one line printed; no traceback."""


class PipelineError(Exception):
    """Bad input: a config value, a dataset, a download. The message names the cause."""


class ConfigError(PipelineError, ValueError):
    """A bad configuration value or override."""


class DataError(PipelineError):
    """Missing, corrupt or mismatched data (a checksum, a schema, a download)."""
