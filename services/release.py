"""The Procfile's `release`: every table of the project's processes, migrated
before a new version's processes start. (Each process also migrates what it
needs as it starts, so the release may be skipped.)

    python -m services.release
"""

from services.web.tables import INDEXES, KEEPER_TABLES
from services.workers import WORKERS
from shared.migrations import Steps, migrate_all

STEPS: Steps = [*(step for worker in WORKERS.values() for step in worker.migrations), *INDEXES, *KEEPER_TABLES]

if __name__ == "__main__":
    migrate_all(STEPS)
