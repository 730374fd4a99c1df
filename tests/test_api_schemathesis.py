"""A property-based run of schemathesis over the API's own OpenAPI document against the live
app: generated requests to every operation must never get a 5xx, and every answer must match
the schema the document gives for it (problem+json errors included). Bounded to a few examples
per operation so the whole run stays well under a minute."""

from __future__ import annotations

import pytest

from tests.api_site import running_site

EXAMPLES = 12


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("api-fuzz")
    with running_site(root, {}, api_token_rate=100_000, max_upload_bytes=2**20) as running:
        yield running


def _fuzz(site, token: str, methods: set[str]) -> tuple[int, dict[int, int]]:
    """Fuzz the operations of `methods` with `token`; returns (operations, count by status)."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error, response_schema_conformance

    schema = schemathesis.openapi.from_url(f"{site.base}/api/v1/openapi.json")
    headers = {"Authorization": f"Bearer {site.tokens[token]}"}
    ran, statuses = 0, {}
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.method.upper() not in methods:
            continue

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def check(case: schemathesis.Case) -> None:
            response = case.call_and_validate(
                base_url=f"{site.base}/api/v1",
                headers=headers,
                checks=[not_a_server_error, response_schema_conformance],
                timeout=30,
            )
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

        check()
        ran += 1
    return ran, statuses


def test_no_operation_answers_5xx_or_breaks_its_schema(site):
    """Every operation with a read token (admin routes answer 403 problems), then the GET
    operations with an admin token (jobs, studies, audit are read, nothing is started)."""
    operations, statuses = _fuzz(site, "read", {"GET", "POST", "DELETE"})
    assert operations == 18 and statuses.get(
        200, 0
    )  # 18: + the source resolver > 0 and statuses.get(403, 0) > 0
    assert sum(statuses.values()) >= 17 * 3 and not any(code >= 500 for code in statuses)
    operations, statuses = _fuzz(site, "admin", {"GET"})
    assert operations == 12 and statuses.get(200, 0) > 0  # 12: + the source resolver
