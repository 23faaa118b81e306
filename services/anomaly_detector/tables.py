"""The anomaly detector's tables: its declaration's migrations (shared.worker.Worker.migrations),
applied once each, in order; never edit a step that has shipped, add one."""

MIGRATIONS = (
    ("failed_login_counts", """
        CREATE TABLE failed_login_counts (
            user_id      text        NOT NULL,
            window_start timestamptz NOT NULL,
            count        bigint      NOT NULL,
            PRIMARY KEY (user_id, window_start))"""),
    ("alert_outbox", """
        CREATE TABLE alert_outbox (
            id              bigserial   PRIMARY KEY,
            user_id         text        NOT NULL,
            window_start    timestamptz NOT NULL,
            severity        text        NOT NULL,
            payload         text        NOT NULL,
            created_at      timestamptz NOT NULL DEFAULT now(),
            published_at    timestamptz,
            kafka_partition int,
            kafka_offset    bigint,
            delivered_at      timestamptz,
            delivery_attempts int         NOT NULL DEFAULT 0,
            next_delivery_at  timestamptz NOT NULL DEFAULT now(),
            UNIQUE (user_id, window_start, severity))"""),
    ("failed_login_counts_by_window", """
        CREATE INDEX failed_login_counts_by_window ON failed_login_counts (window_start)"""),
    # An alert a channel refused for good is set aside, not retried.
    ("alert_outbox_refused_at", """
        ALTER TABLE alert_outbox ADD COLUMN refused_at timestamptz"""),
    # The publisher and the delivery thread look for pending alerts every
    # second: these indexes hold only those, however long the outbox grows.
    ("alert_outbox_unpublished", """
        CREATE INDEX alert_outbox_unpublished ON alert_outbox (id) WHERE published_at IS NULL"""),
    ("alert_outbox_undelivered", """
        CREATE INDEX alert_outbox_undelivered ON alert_outbox (id)
        WHERE delivered_at IS NULL AND refused_at IS NULL"""),
    # Alerts a publisher began to send and has not marked yet (alerts.py).
    ("alert_sends", """
        CREATE TABLE alert_sends (
            alert_id     bigint      PRIMARY KEY,
            attempted_at timestamptz NOT NULL DEFAULT now())"""),
)
