import errno
import os
import subprocess

import pytest

from tests.conftest import require


class SmallDisk:
    """A filesystem of its own, small enough to fill: a tmpfs (mounting one needs root)."""

    def __init__(self, path):
        self.path = path
        self.filler = path / "filler"

    def fill(self) -> None:
        """Take every byte left: a write that needs a new block then fails with ENOSPC."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        chunk = b"x" * 65536
        try:
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC or len(chunk) == 1:
                        break
                    chunk = chunk[: len(chunk) // 2]
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink()

    def full(self) -> bool:
        return os.statvfs(self.path).f_bavail == 0


@pytest.fixture
def small_disk(tmp_path):
    path = tmp_path / "disk"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(path)], capture_output=True)
    require(mounted.returncode == 0, f"a tmpfs of the test's own (mount, as root): {mounted.stderr.decode().strip()}")
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
