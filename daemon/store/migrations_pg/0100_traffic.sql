-- PostgreSQL's form of migrations/0100_traffic.sql (see there).
CREATE TABLE traffic_samples (
	proxy TEXT NOT NULL,
	minute BIGINT NOT NULL,
	machine_id BIGINT NOT NULL,
	tunnel_id BIGINT NOT NULL DEFAULT 0,
	bytes_in BIGINT NOT NULL DEFAULT 0,
	bytes_out BIGINT NOT NULL DEFAULT 0,
	conns BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (proxy, minute)
);
CREATE INDEX traffic_samples_minute ON traffic_samples(minute);

CREATE TABLE traffic_totals (
	proxy TEXT PRIMARY KEY,
	machine_id BIGINT NOT NULL,
	tunnel_id BIGINT NOT NULL DEFAULT 0,
	seen_in BIGINT NOT NULL DEFAULT 0,
	seen_out BIGINT NOT NULL DEFAULT 0,
	seen_day TEXT NOT NULL DEFAULT '',
	total_in BIGINT NOT NULL DEFAULT 0,
	total_out BIGINT NOT NULL DEFAULT 0,
	conns BIGINT NOT NULL DEFAULT 0
);
