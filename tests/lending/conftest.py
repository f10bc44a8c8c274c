"""What the lending tests share: people who have been on the appliance longer than the four-eyes cooling period,
so that another one may approve the plan one proposes."""

from tests.accounts.settled import make_user  # noqa: F401
