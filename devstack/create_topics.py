"""The workers' topics (services.workers.TOPICS) on a broker that has not
got them yet: docker-compose's `topics` service.

    python -m devstack.create_topics BOOTSTRAP PARTITIONS
"""

import sys

from kafka.admin import KafkaAdminClient

from services.workers import TOPICS


def create_topics(bootstrap: str, partitions: int) -> list[str]:
    """The topics it created: those the broker did not have."""
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        existing = set(admin.list_topics())  # asked once, not once a topic
        missing = [topic for topic in TOPICS if topic not in existing]
        if missing:
            admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1} for topic in missing},
                                wait_for_metadata=True)
    return missing


if __name__ == "__main__":
    print("created topics:", " ".join(create_topics(sys.argv[1], int(sys.argv[2]))) or "none")
