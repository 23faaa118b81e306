"""The suite's own check for leaked secrets finds each kind it names."""

import pytest

from tests.checks import assert_no_secret_in

GIVEN = {"DATABASE_URL": "postgres://app:s3cret-pw@db.example.test:5432/app",
         "PAGERDUTY_ROUTING_KEY": "R0UT1NGKEY", "SMTP_PASSWORD": "smtp-pass-1", "DASHBOARD_PASSWORD": "dash-pw-2"}


@pytest.mark.parametrize(("leaked", "named"), [("s3cret-pw", "DATABASE_URL's password"),
                                               ("R0UT1NGKEY", "PAGERDUTY_ROUTING_KEY"),
                                               ("smtp-pass-1", "SMTP_PASSWORD"), ("dash-pw-2", "DASHBOARD_PASSWORD")])
def test_a_secret_in_the_output_is_found_and_named(leaked, named):
    with pytest.raises(AssertionError, match=named):
        assert_no_secret_in(f"event=batch app=x error=login as {leaked} refused", GIVEN)


def test_output_without_them_passes_as_do_secrets_not_given():
    assert_no_secret_in("event=batch app=x host=db.example.test user=app", GIVEN)
    assert_no_secret_in("anything", {"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/postgres"})
