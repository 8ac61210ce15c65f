"""The public fixtures of an installed wheeld (``wheeld.testing.fixtures``), as any
driver's distribution takes them: nothing here comes from wheeld's repository."""

from wheeld.testing.fixtures import broker, pty_wheel, shared_broker, table  # noqa: F401
