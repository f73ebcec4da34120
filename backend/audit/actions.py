"""What an audit entry records: the `action` of an audit_entries row."""

from __future__ import annotations

from enum import StrEnum


class AuditAction(StrEnum):
    """Every change the API makes, by name (stored as these strings: no migration to add one)."""

    job_submit = "job.submit"
    job_cancel = "job.cancel"
    job_restart = "job.restart"
    job_suspend = "job.suspend"
    job_resume = "job.resume"
    task_restart = "task.restart"
    job_checkpoint = "job.checkpoint"
    job_evaluator = "job.evaluator"
    token_create = "token.create"  # noqa: S105 - an action, not a secret
    token_revoke = "token.revoke"  # noqa: S105 - an action, not a secret
    user_create = "user.create"
    user_disable = "user.disable"
    user_enable = "user.enable"
    project_create = "project.create"
    member_set = "member.set"
    member_remove = "member.remove"
    quota_set = "quota.set"
    host_forget = "host.forget"
    host_drain = "host.drain"
    host_undrain = "host.undrain"
    host_cordon = "host.cordon"
    host_uncordon = "host.uncordon"
    host_notice = "host.notice"
    sweep_create = "sweep.create"
    sweep_stop = "sweep.stop"
