"""The batch lifecycle: every transition of a batch, and the only code that writes its state.

`transitions.Lifecycle` holds the transitions, `reads.BatchReads` what a batch looks like now
(`Lifecycle.reads`), and `rebuild` what puts back what Redis lost (`pdfqueue.recovery` decides
when).

    register --> PENDING --start--> PROCESSING --record (its last file)--> COMPLETED
                    |                    |      ^                               |
                    |                    |      +----------- requeue ----------+
                    |                    |           (a retry round of its failed files)
                    +------- fail -------+--> FAILED       (ingest refused or gave up, or
                    |                    |                  the ZIP holds no PDF)
                    +------ cancel ------+--> CANCELLED    (pending work dropped)

Which store each transition writes first, and what repairs a process that dies in between:

- register, start, record and requeue write PostgreSQL first (the row, the listing, the
  per-file outcomes, the retry round under the row's lock), then Redis (`state`: its Lua
  scripts count every file once and flip the batch on its last one). Redis is rebuildable from
  PostgreSQL, so what dies in between is redone from the rows: a repeated call or a retried
  job finds them (`restore` writes live state that is missing), and `pdfqueue.recovery`
  rebuilds a running batch whose live state or queued work is gone (`rebuild`).
- completion (the last `record`), fail and cancel write
  Redis first, then the batch row: a process that dies in between leaves Redis ahead, and
  `settle`, run by whatever touches the batch next, writes the terminal status PostgreSQL
  missed.
- The batch metric comes last. Every completion and failure this process writes runs
  `on_ended` (the worker's queues the batch's webhook).
"""

from pdfqueue.lifecycle.reads import BatchReads
from pdfqueue.lifecycle.rebuild import Rebuilt, rebuild
from pdfqueue.lifecycle.transitions import Lifecycle

__all__ = ["BatchReads", "Lifecycle", "Rebuilt", "rebuild"]
