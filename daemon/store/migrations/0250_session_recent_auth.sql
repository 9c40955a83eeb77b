-- When a dashboard session last proved its password or code: at login, and
-- again at each step-up (POST /api/auth/step-up). Sensitive changes need it
-- within the last 10 minutes ("sudo mode"). 0 means the session's
-- created_at (sessions from before this column logged in then).
ALTER TABLE sessions ADD COLUMN authenticated_at INTEGER NOT NULL DEFAULT 0;
