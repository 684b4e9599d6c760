"""The client commands' exit codes, one home, and how each command's help lists them."""

from __future__ import annotations

EXIT_OK = 0
"""The command did what was asked; for a batch: it completed and no file failed."""
EXIT_ERROR = 1
"""A request failed: wrong URL, server down, no or bad token, unknown batch, not a ZIP."""
EXIT_USAGE = 2
"""The command line itself is wrong (argparse)."""
EXIT_FILES_FAILED = 3
"""The batch completed, but at least one file failed (see `pdfqueue files ID --outcome failed`)."""
EXIT_BATCH_ENDED = 4
"""The batch ended FAILED (its archive was rejected or holds no PDF) or CANCELLED."""
EXIT_ALREADY_ENDED = 5
"""`cancel`: the batch had ended COMPLETED or FAILED before; nothing was cancelled."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT); a batch being followed goes on."""
EXIT_PIPE_CLOSED = 141
"""Whatever read stdout closed it first (`| head`): 128 + SIGPIPE, as a shell tool ends."""
EXIT_CODES = f"""exit codes:
  {EXIT_OK}    done; for a batch: completed and no file failed
  {EXIT_ERROR}    a request failed (wrong URL, server down, no or bad token, unknown batch,
       not a ZIP): the message says what to do
  {EXIT_USAGE}    wrong command line
  {EXIT_FILES_FAILED}    the batch completed but some files failed
  {EXIT_BATCH_ENDED}    the batch failed as a whole or was cancelled
  {EXIT_ALREADY_ENDED}    cancel: the batch had already ended COMPLETED or FAILED; nothing cancelled
  {EXIT_INTERRUPTED}  interrupted (the batch goes on; `pdfqueue watch ID` follows it again)
  {EXIT_PIPE_CLOSED}  what read stdout closed it early (`| head`); nothing else is wrong"""
