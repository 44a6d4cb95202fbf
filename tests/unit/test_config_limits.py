"""Config values a sweep found taken and then failing late (2026-12-07): an infinite duration crashed the wedge
watchdog's thread, a named key skipped the checks ``api_keys`` get, absurd thread and context counts reached
llama-server. Each is refused at load, naming its key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tiankong.config import load_config
from tiankong.errors import ConfigError

HASH = "sha256:" + "ab" * 32


@pytest.mark.parametrize("toml, key", [
    ("[engine]\nwedge_check_s = inf", "engine.wedge_check_s"),
    ("[server]\nrequest_timeout_s = nan", "server.request_timeout_s"),
    ("[degradation]\np99_latency_s = [nan]", "degradation.p99_latency_s"),
    ("[degradation]\nqueue_depth = [-1]", "degradation.queue_depth"),
    ("[engine]\nthreads = 100000", "engine.threads"),
    ("[engine]\nwedge_check_s = 1e10", "engine.wedge_check_s"),  # past threading.TIMEOUT_MAX: OverflowError
    ("[engine]\nwedge_probe_timeout_s = 1e300", "engine.wedge_probe_timeout_s"),
    ("[batches]\nfile_ttl_s = 1e12", "batches.file_ttl_s"),
    ("[engine]\nctx = 1000000000000", "engine.ctx"),
    ('[[server.keys]]\nkey = "sha256:zzzzzzzz"\nname = "a"', "server.keys.0.key"),
    ('[[server.keys]]\nkey = "        "\nname = "a"', "server.keys.0.key"),
    # lax validation read these as True, 1, 90.0, 8081 and False without a word (a read-only sweep, 2026-12-07)
    ('[server]\nlog_prompts = "yes"', "server.log_prompts"),
    ("[engine]\nslots = true", "engine.slots"),
    ('[engine]\nstartup_timeout_s = "90"', "engine.startup_timeout_s"),
    ('[server]\nport = "8081"', "server.port"),
    ('[engine]\nembeddings = "off"', "engine.embeddings"),
    # read by nothing: accepted and ignored (a sweep, 2026-12-07); at their defaults they still load
    ('[engine]\npooling = "mean"', "engine.pooling"),
    ('[engine]\nspec_auto_ngram = ["ngram-mod"]', "engine.spec_auto_ngram"),
])
def test_a_value_that_would_fail_late_is_refused_at_load(tmp_path: Path, toml: str, key: str) -> None:
    path = tmp_path / "tiankong.toml"
    path.write_text(toml + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(path)


def test_the_values_the_docs_show_still_load(tmp_path: Path) -> None:
    path = tmp_path / "tiankong.toml"
    path.write_text(f'[engine]\nthreads = 16\nctx = 32768\nwedge_check_s = 0\n[degradation]\nqueue_depth = [4, 8]\n'
                    f'[[server.keys]]\nkey = "{HASH}"\nname = "team-a"\n', encoding="utf-8")
    config = load_config(path)
    assert config.engine.threads == 16 and config.server.keys[0].key == HASH
    path.write_text('[engine]\nstartup_timeout_s = 90\nembeddings = true\n[server]\nhost = "127.0.0.1"\n',
                    encoding="utf-8")  # an integer for a float, a path or host as a string: still read
    assert load_config(path).engine.startup_timeout_s == 90.0


def test_a_config_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """A Windows editor's UTF-8 BOM made the file 'not valid TOML (at line 1, column 1)'."""
    path = tmp_path / "tiankong.toml"
    path.write_bytes(b"\xef\xbb\xbf[server]\nport = 8123\n")
    assert load_config(path).server.port == 8123


def test_a_long_time_to_live_is_not_a_wait(tmp_path: Path) -> None:
    """Keeping batch files two years is a date, not a wait: the duration bound (a year) is a century for *_ttl_s."""
    path = tmp_path / "tiankong.toml"
    path.write_text("[batches]\nfile_ttl_s = 63072000\n", encoding="utf-8")
    assert load_config(path).batches.file_ttl_s == 63072000


def test_a_key_read_once_a_command_line_flag_is_on_loads(tmp_path: Path) -> None:
    """`serve --embeddings` with `pooling = "mean"` in the file: checked after the flag, not before it."""
    from tiankong.config import check_keys_read

    path = tmp_path / "tiankong.toml"
    path.write_text('[engine]\npooling = "mean"\n', encoding="utf-8")
    config = load_config(path, check_read=False)
    with pytest.raises(ConfigError, match="engine.pooling"):
        check_keys_read(config, path)
    config.engine.embeddings = True  # what serve --embeddings sets
    check_keys_read(config, path)


@pytest.mark.parametrize("toml, fragment", [
    ('[server]\napi_keys = ["alpha-key-1", "alpha-key-1"]\n', "api_keys[1] is the same key as api_keys[0]"),
    ('[server]\napi_keys = ["alpha-key-1"]\n[[server.keys]]\nkey = "alpha-key-1"\nname = "a"\n',
     "keys[0] (a) is the same key as api_keys[0]"),
])
def test_a_key_listed_twice_is_refused(tmp_path: Path, toml: str, fragment: str) -> None:
    """The last entry's name and rpm applied, and nothing said which."""
    path = tmp_path / "config.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_config(path)
