"""Worker for the failure-report comparison: rank 1 raises ValueError, the
others wait to be stopped by their launcher (at most 60 s). With --record the
failure goes through torch's @record, which writes TORCHELASTIC_ERROR_FILE,
so the launcher's summary shows the traceback from that file.
"""
import os
import sys
import time


def main():
    if os.environ["RANK"] == "1":
        raise ValueError("boom from rank 1")
    time.sleep(60)


if "--record" in sys.argv[1:]:
    from torch.distributed.elastic.multiprocessing.errors import record
    main = record(main)
main()
