"""What a ``shell`` command sees of the runtime's environment: no credentials.

The scrub (:mod:`actors.tools.envscrub`) is pure; its rules are tested here
directly -- names, URLs with credentials, known token formats, the random-token
heuristic (hypothesis: harmless values are never touched, passwords in URLs
never pass) -- and end to end: ``env``, ``printenv`` and
``cat /proc/self/environ`` run by the real shell tool reveal none of a set of
realistic secrets placed in the runtime's environment.
"""

from __future__ import annotations

import base64
import random
import string
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.tools import ToolContext, ToolRegistry, WorkspaceFs, invoke_tool
from fore.actors.tools.builtin import Shell
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.envscrub import (
    random_token,
    scrub_env,
    scrub_value,
    secret_name,
    strip_url_credentials,
)
from fore.actors.tools.proctrack import tracking_unavailable
from fore.messages.conversation import ToolCall

# Realistic secrets, under their usual names and under innocent ones. The value
# part that must never reach a command is the second element.
REALISTIC: dict[str, tuple[str, str]] = {
    "OPENAI_API_KEY": (
        "sk-proj-Q3x9Lm2Zr8Tn4Vb7Wc1Yd6Fh0Kj5Pq2Rs9Ut3Xv8",
        "Q3x9Lm2Zr8Tn4Vb7Wc1Yd6Fh",
    ),
    "REDIS_URL": ("redis://:r3d1sS3cret@cache.internal:6379/0", "r3d1sS3cret"),
    "MONGODB_URI": (
        "mongodb+srv://app:M0ngoPassw0rd@cluster0.abcde.mongodb.net/db?retryWrites=true",
        "M0ngoPassw0rd",
    ),
    "HTTPS_PROXY": ("http://alice:Pr0xyPa55@proxy.corp.example:3128", "Pr0xyPa55"),
    "https_proxy": ("http://bob:lowerPr0xy@proxy.corp.example:3128/", "lowerPr0xy"),
    "ALL_PROXY": ("socks5://carol:s0cksPw@127.0.0.1:1080", "s0cksPw"),
    "APIKEY": ("plainapikeyvalue", "plainapikeyvalue"),
    "SLACK_WEBHOOK_URL": (
        "https://hooks.slack.com/services/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",
        "x7Qf2LmZ9Rk3Vb8Nc1Td5Wy6",
    ),
    "DEPLOY_NOTIFY": (  # a webhook under an innocent name
        "https://discord.com/api/webhooks/112233445566778899/aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
        "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
    ),
    "DATABASE_URL": ("postgres://app:pgS3cretPw@db.internal:5432/app", "pgS3cretPw"),
    "SENTRY_DSN": (
        "https://9f8e7d6c5b4a39281706f5e4d3c2b1a0@o1.ingest.sentry.io/1",
        "9f8e7d6c5b4a",
    ),
    "GITHUB_TOKEN": ("ghp_R4nd0mT0k3nV4lu3F0rT3st1ngXyZ012345", "R4nd0mT0k3nV4lu3"),
    "GH_ENTERPRISE": ("ghp_An0th3rT0k3nV4lu3F0rT3st1ngXyZ6789a", "An0th3rT0k3nV4lu3"),
    "AWS_SECRET_ACCESS_KEY": ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY", "wJalrXUtnFEMI"),
    "MY_SERVICE_CONFIG": ("sk_live_4eC39HqLyjWDarjtT1zdp7dc2Xy9", "4eC39HqLyjWDarjtT1zdp7dc"),
    "CACHE_SETTING": ("Zx8Kq2Lm9Rt4Vb7Nc1Wd6Yf3Hj0Pg5Ts", "Zx8Kq2Lm9Rt4Vb7Nc1Wd6Yf3Hj0Pg5Ts"),
    "BUILD_HASH_SALT": ("correct-horse-battery", "correct-horse-battery"),
    "ID_JWT_FOR_CI": (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNryP4J3jVmNHl0w5N",
    ),
    "MSSQL": ("Server=db;Database=app;User Id=sa;Password=hunter2sql;", "hunter2sql"),
    "JAVA_TOOL_OPTIONS": ("-Djavax.net.ssl.trustStorePassword=ch4ngeit", "ch4ngeit"),
    "PIP_INDEX_URL": ("https://__token__:pypi-AgEIcHlwaS5vcmc@pypi.example/simple", "pypi-AgEI"),
    "GIT_REMOTE": (
        "https://x-access-token:ghs_16C7e42F292c6912E7710c838347Ae178B4a@github.com/o/r",
        "ghs_16C7",
    ),
    "JUPYTER_URL": (
        "http://localhost:8888/?token=c8de56fa4deed24899803e93c227592aef6538f93025fe01",
        "c8de56fa",
    ),
    "FORE_BASE_URL": ("http://127.0.0.1:1/v1", "127.0.0.1:1/v1"),
    "MYSQL_PWD": ("mysqlpw", "mysqlpw"),
    "lower_case_token": ("lowervalue", "lowervalue"),
}

HARMLESS: dict[str, str] = {
    "PATH": "/nix/store/0q8a9k2mn3b4v5c6x7z8l9p0o1i2u3y4-python3-3.11.7/bin:/usr/bin",
    "LS_COLORS": "rs=0:di=01;34:ln=01;36:mh=00:pi=40;33:so=01;35:do=01;35:*.tar=01;31:*.tgz=01;31",
    "PWD": "/home/dev/projects/app",
    "HOME": "/home/dev",
    "LANG": "en_US.UTF-8",
    "TERM_SESSION_ID": "w0t0p0:5F9C3A1E-2B4D-4C6E-8F0A-1B2C3D4E5F60",
    "SSH_AUTH_SOCK": "/tmp/ssh-XXXXq3z9AbCd/agent.1234",
    "TMPDIR": "/var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T/",
    "NODE_OPTIONS": "--max-old-space-size=4096",
    "RUSTUP_TOOLCHAIN": "stable-x86_64-unknown-linux-gnu",
    "HOSTNAME": "runner-abc123-project-456-concurrent-0",
    "PS1": r"\[\e]0;\u@\h: \w\a\]${debian_chroot:+($debian_chroot)}\u@\h:\w\$ ",
    "npm_config_user_agent": "npm/10.2.4 node/v20.11.0 linux x64 workspaces/false",
    "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus,guid=0f1e2d3c4b5a69788796a5b4c3",
    "XDG_DATA_DIRS": "/usr/share/gnome:/usr/local/share/:/usr/share/",
    "NIX_CFLAGS_COMPILE": "-isystem /nix/store/0q8a9k2mn3b4v5c6x7z8l9p0o1i2u3y4-zlib-1.3/include",
    "EDITOR": "code --wait",
    "LESSOPEN": "| /usr/bin/lesspipe %s",
    "PIP_INDEX_URL_PUBLIC": "https://pypi.org/simple",
    "NPM_REGISTRY": "https://registry.npmjs.org/@babel%2fcore",
    "PLAIN_PROXY": "http://proxy.corp.example:3128",
    "JAVA_OPTS": "-Xmx2g -XX:+UseContainerSupport -XX:MaxRAMPercentage=75.0",
    "CFLAGS": "-O2 -g -pipe -Wall -Werror=format-security -fstack-protector-strong",
    "GIT_AUTHOR_NAME": "Dev Eloper",
    "KEYMAP": "us",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONPATH": "src:tests",
    "VIRTUAL_ENV": "/home/dev/projects/app/.venv",
    "CONDA_PROMPT_MODIFIER": "(base) ",
    "WT_PROFILE_ID": "{61c54bbd-c2c6-5271-96e7-009a87ff44bf}",
}


# -- names ------------------------------------------------------------------------------


def test_the_name_rules() -> None:
    for name in (
        "OPENAI_API_KEY", "APIKEY", "apiKey", "SLACK_WEBHOOK_URL", "SENTRY_DSN", "DB_PASSWORD",
        "PGPASSWORD", "MYSQL_PWD", "SMTP_PASS", "DBPASS", "AWS_REGION", "GITHUB_SHA",
        "GOOGLE_APPLICATION_CREDENTIALS", "CLIENT_SECRET", "MY_SERVICE_SECRET", "lower_case_token",
        "NPM_CONFIG__AUTH", "AZURE_STORAGE_CONNECTION_STRING", "FORE_BASE_URL", "AWS_ACCESS_KEY_ID",
        "X_SESSION_COOKIE", "CI_JOB_JWT", "GH_PAT",
    ):  # fmt: skip
        assert secret_name(name), name
    for name in (
        "PATH", "HOME", "PWD", "OLDPWD", "LANG", "KEYMAP", "KEYBOARD_LAYOUT",
        "TOKENIZERS_PARALLELISM", "MY_SETTING", "GIT_AUTHOR_NAME", "SSH_AUTH_SOCK",
        "DATABASE_URL", "REDIS_URL", "PGPASSFILE", "XAUTHORITY", "GNOME_KEYRING_CONTROL",
        "HTTPS_PROXY",
    ):  # fmt: skip
        assert not secret_name(name), name


WORDS = [
    "app", "build", "cache", "config", "data", "debug", "deploy", "dir", "home", "host", "level",
    "log", "mode", "name", "node", "path", "port", "prefix", "profile", "region", "server",
    "service", "settings", "shell", "size", "term", "user", "version", "worker", "zone",
]  # fmt: skip
SECRET_WORDS = ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "WEBHOOK", "DSN"]


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(st.sampled_from(WORDS), max_size=3),
    word=st.sampled_from(SECRET_WORDS),
    after=st.lists(st.sampled_from(WORDS), max_size=2),
    lower=st.booleans(),
)
def test_a_secret_word_anywhere_in_a_name_makes_it_secret(
    before: list[str], word: str, after: list[str], lower: bool
) -> None:
    name = "_".join([*before, word, *after]).upper()
    assert secret_name(name.lower() if lower else name)
    assert scrub_env({name: "x", "PATH": "/bin"}) == {"PATH": "/bin"}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
def test_names_made_of_ordinary_words_are_not_secret(words: list[str]) -> None:
    assert not secret_name("_".join(words).upper())


# -- URLs with credentials -------------------------------------------------------------------

PASSWORD_CHARS = string.ascii_letters + string.digits + "!$%&()*+,;=:@-._~"
HOSTS = ["db.internal", "proxy.corp.example", "cache", "127.0.0.1", "cluster0.abcde.mongodb.net"]


@settings(max_examples=400, deadline=None)
@given(
    name=st.sampled_from(["HTTPS_PROXY", "REDIS_URL", "MONGODB_URI", "DATABASE_URL", "UPSTREAM"]),
    scheme=st.sampled_from(["http", "https", "redis", "rediss", "postgres", "mongodb+srv", "amqp"]),
    user=st.text(string.ascii_lowercase + string.digits + "._-", max_size=12),
    password=st.text(PASSWORD_CHARS, min_size=1, max_size=40),
    host=st.sampled_from(HOSTS),
    port=st.one_of(st.none(), st.integers(1, 65535)),
    path=st.sampled_from(["", "/", "/0", "/app", "/db?retryWrites=true&w=majority", "/simple/"]),
)
def test_a_url_password_never_passes(  # noqa: PLR0917 (hypothesis passes them by name)
    name: str, scheme: str, user: str, password: str, host: str, port: int | None, path: str
) -> None:
    authority = host + (f":{port}" if port is not None else "")
    url = f"{scheme}://{user}:{password}@{authority}{path}"
    out = scrub_value(name, url)
    without = {f"{scheme}://{user}@{authority}{path}", f"{scheme}://{authority}{path}"}
    assert out is None or out in without, (url, out)


def test_url_passwords_with_unencoded_delimiters_are_found() -> None:
    for url, kept in [
        ("postgres://u:pa/ss@db/app", "postgres://u@db/app"),
        ("redis://:p@ss@cache:6379", "redis://cache:6379"),
        ("http://u:p?w#d@proxy:3128", "http://u@proxy:3128"),
    ]:
        assert strip_url_credentials(url) == (kept, False), url


def test_urls_without_credentials_are_untouched() -> None:
    for url in (
        "https://registry.npmjs.org/@babel%2fcore",
        "http://proxy:8080/@x",
        "https://host:8443/path/@scope/pkg",
        "https://pypi.org/simple",
        "postgres://localhost/dev",
    ):
        assert scrub_value("SOME_URL", url) == url, url


# -- tokens ----------------------------------------------------------------------------------


def test_realistic_secrets_are_dropped_or_stripped() -> None:
    env = {name: value for name, (value, _) in REALISTIC.items()}
    out = scrub_env(env)
    for name, (_, secret) in REALISTIC.items():
        assert secret not in out.get(name, ""), (name, out.get(name))
        assert all(secret not in v for v in out.values()), name
    # URLs keep what is not a credential
    assert out["HTTPS_PROXY"] == "http://alice@proxy.corp.example:3128"
    assert out["REDIS_URL"] == "redis://cache.internal:6379/0"


def test_harmless_values_are_left_alone() -> None:
    assert scrub_env(HARMLESS) == HARMLESS


def test_allowed_names_pass_unchanged() -> None:
    env = {"GITHUB_TOKEN": "ghp_x", "HTTPS_PROXY": "http://a:b@p:1", "PATH": "/bin"}
    assert scrub_env(env, allow=["GITHUB_TOKEN", "HTTPS_PROXY"]) == env


RANDOM = random.Random(19)
B62 = string.ascii_letters + string.digits


def _tokens(kind: str, n: int, count: int) -> list[str]:
    def one() -> str:
        if kind == "b62":
            return "".join(RANDOM.choice(B62) for _ in range(n))
        if kind == "hex":
            return "".join(RANDOM.choice("0123456789abcdef") for _ in range(n))
        raw = bytes(RANDOM.randrange(256) for _ in range(n))
        coded = base64.b64encode(raw) if kind == "b64" else base64.urlsafe_b64encode(raw)
        return coded.decode()[:n]

    return [one() for _ in range(count)]


@pytest.mark.parametrize("kind", ["b62", "hex", "b64", "b64url"])
def test_random_tokens_under_innocent_names_are_dropped(kind: str) -> None:
    """The heuristic is statistical: over a fixed sample of 40-character tokens it misses
    at most 1% (measured about 0.1%), and never one whose format is known."""
    tokens = _tokens(kind, 40, 1000)
    missed = [t for t in tokens if scrub_value("SOME_SETTING", t) is not None]
    assert len(missed) <= 10, missed[:5]


PATH_WORDS = [
    "usr",
    "local",
    "bin",
    "lib",
    "share",
    "opt",
    "home",
    "dev",
    "projects",
    "node_modules",
]


TOP_DIRS = ["usr", "home", "tmp", "var", "opt", "nix", "run", "Users", "Library", "T", "1000"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(TOP_DIRS),
            st.lists(
                st.one_of(
                    st.sampled_from(PATH_WORDS), st.text(B62 + "._-", min_size=1, max_size=40)
                ),
                max_size=6,
            ),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_absolute_paths_and_path_lists_are_never_tokens(parts: list[tuple[str, list[str]]]) -> None:
    """Whatever their other components (random temporary names, hashes), paths whose
    first component is a plain directory name are structure, not secrets."""
    value = ":".join("/" + "/".join([top, *rest]) for top, rest in parts)
    assert scrub_value("SOME_DIRS", value) == value


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=8),
    st.sampled_from(["-", "_", ".", ""]),
    st.booleans(),
    st.one_of(st.none(), st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,2}", fullmatch=True)),
)
def test_words_identifiers_and_versions_are_not_tokens(
    words: list[str], sep: str, camel: bool, version: str | None
) -> None:
    parts = [w.capitalize() for w in words] if camel else words
    value = sep.join(parts) + (f"-{version}" if version else "")
    assert scrub_value("SOME_NAME", value) == value


@settings(max_examples=200, deadline=None)
@given(st.uuids(), st.sampled_from(["", "{", "w0t0p0:"]))
def test_uuids_are_identifiers(uuid: object, prefix: str) -> None:
    value = f"{prefix}{uuid}"
    assert scrub_value("SESSION_ID", value) == value
    assert scrub_value("SESSION_ID", value.upper()) == value.upper()


def test_random_token_needs_length_and_randomness() -> None:
    assert not random_token("aB3")
    assert not random_token("stable-x86_64-unknown-linux-gnu")
    assert not random_token("ThisIsAVeryLongIdentifierName")
    assert not random_token("TLS_AES_128_GCM_SHA256_WITH_MORE")
    assert random_token("Zx8Kq2Lm9Rt4Vb7Nc1Wd6Yf3")
    assert random_token("3f2a9c8b7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a")


# -- end to end: what the shell tool's commands see ---------------------------------------------


def _run(tool: Shell, ws: Path, command: str) -> str:
    ctx = ToolContext(
        fs=WorkspaceFs(ws),
        cancel=CancelToken(),
        deadline=time.monotonic() + 60,
        session_id="s",
        call_id="c",
    )
    call = ToolCall(id="c", name="shell", arguments={"command": command})
    result = invoke_tool(ToolRegistry([tool]), call, ctx)
    assert result.outcome == "ok", result.output
    return str(result.output)


BACKENDS = ["auto", "cgroup", "subreaper", "group"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "command",
    ["env", "printenv", "cat /proc/self/environ", "tr '\\0' '\\n' < /proc/$$/environ", "export -p"],
)
def test_commands_see_none_of_the_runtimes_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, backend: str
) -> None:
    why = tracking_unavailable(backend)
    if why is not None:
        pytest.skip(why)
    for name, (value, _) in REALISTIC.items():
        monkeypatch.setenv(name, value)
    for name, value in HARMLESS.items():
        monkeypatch.setenv(name, value)
    out = _run(Shell(tracking=backend), tmp_path, command)  # type: ignore[arg-type]
    for name, (_, secret) in REALISTIC.items():
        assert secret not in out, f"{name}'s secret reached the command"
    assert "alice@proxy.corp.example:3128" in out  # kept, without its password
    assert "/home/dev/projects/app/.venv" in out
