"""tests/helpers/system.py: a test that needs a system program the project does not install
skips when it is missing (``make test`` on a machine with only python3 and make)."""

from __future__ import annotations

import os
import stat

from helpers.system import java_missing


def _fake_java(folder, version_line: str, rc: int = 0):
    folder.mkdir(parents=True, exist_ok=True)
    java = folder / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\nexit {rc}\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return java


def test_no_java_home_and_no_java_on_path(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert java_missing() == "JAVA_HOME is not set and there is no `java` on PATH"


def test_a_java_home_without_java(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nonexistent"))
    assert java_missing() == f"JAVA_HOME={tmp_path / 'nonexistent'} has no bin/java"


def test_java_home_wins_over_path(monkeypatch, tmp_path):
    _fake_java(tmp_path / "path", 'openjdk version "17.0.15" 2025-04-15')
    monkeypatch.setenv("PATH", f"{tmp_path / 'path'}{os.pathsep}/bin")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert "has no bin/java" in java_missing()
    _fake_java(tmp_path / "jdk" / "bin", 'openjdk version "21.0.1" 2023-10-17')
    assert java_missing() is None


def test_an_old_or_broken_java(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/bin")
    java = _fake_java(tmp_path, 'java version "1.8.0_392"')
    assert java_missing() == f"{java} is Java 8; Spark needs Java 17 or later"
    _fake_java(tmp_path, "Error: could not find libjvm.so", rc=1)
    assert java_missing() == f"{java} -version exited 1"
