"""What a state location is: a directory on this machine, or a file system pyarrow opens
by URI (``hdfs://``, ``s3a://`` read as ``s3://``, ...). Spark reaches every location
through Hadoop (:class:`.state.FileSystem`); the driver's own reads and writes of
arrangement runs go through pyarrow."""
from __future__ import annotations

import os

import pyarrow.fs as pafs


def local_directory(location: str) -> str | None:
    """The directory of a state location on this machine (a path or a file: URI), or None
    for any other file system."""
    if location.startswith("file:"):
        return "/" + location[len("file:"):].lstrip("/")
    return None if "://" in location else os.path.realpath(location)


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow file system and base path of a state location."""
    directory = local_directory(location)
    if directory is not None:
        return pafs.LocalFileSystem(), directory
    if location.startswith("s3a://"):
        location = "s3://" + location[len("s3a://"):]
    return pafs.FileSystem.from_uri(location)
