"""What a failed Spark job says about the task that failed it, for hora.spark.run's RunError.

Py4J hands the driver a Py4JJavaError whose Java exception (a SparkException "Job aborted due
to stage failure") has no cause: the failed task's exception is pasted into its message as
text, a Java stack trace with "Caused by:" sections. When the task's Python raised, that text
is a PythonException holding the Python traceback, followed by the Java frames that reported it.
The message's last lines are Java frames ("... 21 more"), so the cause has to be picked out:

    Job aborted due to stage failure: ... barrier task ResultTask(0, 1) finished unsuccessfully.
    org.apache.spark.api.python.PythonException: Traceback (most recent call last):
      File ...
    ModuleNotFoundError: No module named 'hora'
    <blank line>
    	at org.apache.spark.api.python.BasePythonRunner...
"""

import dataclasses
import re
from typing import Optional

_PYTHON_EXCEPTION = "org.apache.spark.api.python.PythonException: "
# How Spark names the failed task: a barrier stage's "ResultTask(stage, partition)", an ordinary
# stage's "Lost task 1.0 in stage 3.0".
_TASK_PATTERNS = (re.compile(r"ResultTask\(\d+, (\d+)\)"), re.compile(r"Lost task (\d+)\.\d+ in stage"))


@dataclasses.dataclass
class SparkFailure:
    summary: str                       # the stage's reason, then the task's exception and its causes
    partition: Optional[int] = None    # the failed task's partition, when Spark names it
    python_traceback: Optional[str] = None  # the task's Python traceback, when its Python raised


def read(error):
    """The SparkFailure of ``error``, an exception from a Spark action (a Py4JJavaError, or any
    other exception, whose text is used as it is)."""
    java = getattr(error, "java_exception", None)
    text = str(java.getMessage() if java is not None else error).strip()
    lines = text.splitlines()
    if not lines:
        return SparkFailure(type(error).__name__)
    partition = _partition(lines[0])
    traceback = _python_traceback(lines)
    if traceback is not None:
        cause = traceback.splitlines()[-1]  # "ModuleNotFoundError: No module named 'hora'"
        return SparkFailure(f"{lines[0]} The task's Python raised {cause}", partition, traceback)
    causes = _java_causes(lines[1:])
    return SparkFailure(" ".join([lines[0]] + causes), partition)


def _partition(line):
    for pattern in _TASK_PATTERNS:
        found = pattern.search(line)
        if found:
            return int(found.group(1))
    return None


def _python_traceback(lines):
    """The Python traceback inside a PythonException's text, without the Java frames after it."""
    start = next((i for i, l in enumerate(lines) if _PYTHON_EXCEPTION in l), None)
    if start is None:
        return None
    kept = [lines[start].split(_PYTHON_EXCEPTION, 1)[1]]
    for line in lines[start + 1:]:
        if line.startswith("\tat ") or line.startswith("Caused by:"):
            break
        kept.append(line)
    return "\n".join(kept).strip() or None


def _java_causes(lines):
    """The exception lines of a Java stack trace (the first, and each "Caused by:"), without frames."""
    causes = []
    for line in lines:
        if line.startswith("\t") or not line.strip() or line.startswith("Driver stacktrace"):
            continue
        causes.append(line.strip() if not causes else f"({line.strip()})")
    return causes[:3]
