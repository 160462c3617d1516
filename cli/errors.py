"""User-facing errors of the ``railtrain`` command line.

Every failure a person can fix (a bad manifest, a bad flag, an unreachable or
unprepared cluster) ends the command with one sentence per problem on stderr
and a non-zero exit status, never a traceback. Commands raise :class:`CliError`
with those sentences; :func:`describe` turns the library exceptions that can
escape a command (manifest errors, Kubernetes client errors) into the same form.
"""

from __future__ import annotations

from railtrain.crds.validation import ManifestError


class CliError(Exception):
    """A failure to report as sentences, without a traceback.

    Attributes:
        messages: one sentence per problem, printed one per line.
        exit_code: the process exit status (non-zero).
    """

    def __init__(self, *messages: str, exit_code: int = 1):
        self.messages = [m for m in messages if m] or ["failed"]
        self.exit_code = exit_code
        super().__init__("; ".join(self.messages))


def describe(err: BaseException) -> CliError | None:
    """Translate an exception that escaped a command into a :class:`CliError`.

    Args:
        err: the exception.

    Returns:
        The sentences and exit status to report, or ``None`` when ``err`` is a
        programming error that should keep its traceback.
    """
    if isinstance(err, CliError):
        return err
    if isinstance(err, ManifestError):
        return CliError(*(f"{err.source}: {e}" for e in err.errors))
    # The Kubernetes client is imported only by the cluster commands; compare by
    # module so `railtrain validate` and `run --local` never import it. The API
    # edge's typed errors (railtrain.operator.kube.errors) are the client's answers.
    module = type(err).__module__
    if module.startswith(("kubernetes.", "urllib3.", "railtrain.operator.kube.errors")):
        from railtrain.cli.k8s import describe_client_error

        return describe_client_error(err)
    return None


DEBUG_ENV = "RAILTRAIN_DEBUG"


def unexpected(err: BaseException) -> CliError:
    """One sentence for an exception no rule describes (a bug in railtrain or a library it calls).

    Args:
        err: the exception.

    Returns:
        A :class:`CliError` naming the exception's type and the first line of its message, and how to see the
        traceback (``RAILTRAIN_DEBUG=1``; :func:`railtrain.cli.main._report` re-raises then).
    """
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    what = f"{type(err).__name__}: {first}" if first else type(err).__name__
    return CliError(f"unexpected {what} (a bug in railtrain; run again with {DEBUG_ENV}=1 for the traceback)")
