"""The real Airflow UI in headless Chromium (Debian's), driven by Playwright: log in, open a category DAG's
trigger form, see a bad value refused, change params, trigger, wait for success, open the run's report tab.

The deployment is `LocalStack` (SeaweedFS, a stand-in SGLang server, Airflow's api-server, dag-processor and
scheduler on 127.0.0.1). Screenshots of every step are saved in `.artifacts/browser/` for people to look at.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from eagle_datagen_stack.stack import PROJECT, LocalStack, StackOptions

pytestmark = pytest.mark.slow

SCREENSHOTS = PROJECT / ".artifacts" / "browser"
DAG = "eagle_datagen__math"
# As the machine notes say: without the background-networking flags Chromium keeps dialling Google's hosts.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    found = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(found).exists():
        pytest.fail("Debian's chromium is not installed: `make browser` (apt-get install chromium) installs it")
    return found


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with LocalStack(StackOptions(home=tmp_path_factory.mktemp("ui-stack"), draft_vocab_size=64)) as running:
        yield running


@pytest.fixture
def page(stack):
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1000})
        finally:
            browser.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_trigger_form_run_and_report_in_the_real_airflow_ui(stack, page):
    from playwright.sync_api import expect

    base = stack.airflow.api_url
    page.goto(f"{base}/")
    page.locator("input[name=username]").fill("admin")
    page.locator("input[name=password]").fill(stack.airflow.admin_password())
    shot(page, "01-login")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/", timeout=30_000)

    page.goto(f"{base}/dags/{DAG}")
    page.get_by_role("button", name="Trigger Dag").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Prompts and sampling").click()
    form = {name: dialog.locator(f"input[name=element_{name}]") for name in ("limit", "samples_per_prompt", "top_p")}
    expect(form["top_p"]).to_have_value("0.95")  # the recipe's default, shown by the form
    expect(dialog.get_by_text("Nucleus sampling (above 0, at most 1)")).to_be_visible()  # the param's description

    # A bad value: the form sends it, the API server refuses the run and the dialog says which field is wrong.
    form["top_p"].fill("0")
    dialog.get_by_role("button", name="Trigger").click()
    refusal = dialog.get_by_text(re.compile(r"Invalid input for param top_p: 0 is less than or equal to the minimum"))
    expect(refusal).to_be_visible(timeout=30_000)
    refusal.scroll_into_view_if_needed()
    shot(page, "02-trigger-form-refuses-top_p-0")
    assert stack.api.dag_runs(DAG) == []  # refused: no run was created

    form["top_p"].fill("0.9")
    form["limit"].fill("3")
    form["samples_per_prompt"].fill("2")
    shot(page, "03-trigger-form-changed")
    dialog.get_by_role("button", name="Trigger").focus()  # the error toast covers the button: use the keyboard
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(rf"/dags/{DAG}/runs/.+"), timeout=30_000)
    [run] = stack.api.dag_runs(DAG)
    assert {k: run["conf"][k] for k in ("limit", "samples_per_prompt", "top_p")} == {
        "limit": 3,
        "samples_per_prompt": 2,
        "top_p": 0.9,
    }

    assert stack.api.wait_for_run(DAG, run["dag_run_id"], 300, list(stack.components.values())) == "success"
    page.reload()
    expect(page.get_by_text("Success", exact=True).first).to_be_visible(timeout=30_000)
    shot(page, "04-run-succeeded")

    page.get_by_role("link", name="Report", exact=True).click()
    report = page.frame_locator("iframe")
    expect(report.locator("h1")).to_contain_text("run math-", timeout=30_000)
    expect(report.get_by_text('"top_p": 0.9')).to_be_visible()
    assert report.locator("img").count() >= 3  # the plots
    shot(page, "05-report-tab")

    summary = json.loads(_published(stack, run["dag_run_id"]))
    assert summary["counts"]["samples"] == 3 * 2


def _published(stack: LocalStack, dag_run_id: str) -> bytes:
    """The manifest of the DAG run's pipeline run, read from the object store."""
    from eagle_datagen_stack.stack import BUCKET

    assert stack.s3 is not None
    client = stack.s3.client()
    listing = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{stack.options.output_prefix}/manifests/")
    keys = [o["Key"] for o in listing.get("Contents", []) if re.search(r"/run=math-[^.]+\.json$", o["Key"])]
    assert len(keys) == 1, keys
    return client.get_object(Bucket=BUCKET, Key=keys[0])["Body"].read()
