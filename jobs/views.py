"""The jobs pages (staff): templates with data from /api/jobs and the job websockets,
and the comparison page, rendered on the server from a stored evaluation."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from lab.side_by_side import pair_counts

from .comparison import comparison, evaluates, evaluation_of
from .models import Job


@staff_member_required(login_url="/login/")
@ensure_csrf_cookie
def job_list(request: HttpRequest) -> HttpResponse:
    return render(request, "jobs/list.html")


@staff_member_required(login_url="/login/")
@ensure_csrf_cookie
def job_page(request: HttpRequest, job_id) -> HttpResponse:
    if not Job.objects.filter(id=job_id).exists():
        raise Http404("No such job.")
    return render(request, "jobs/detail.html", {"job_id": str(job_id)})


@staff_member_required(login_url="/login/")
def job_comparison(request: HttpRequest, job_id) -> HttpResponse:
    job = Job.objects.filter(id=job_id).first()
    if job is None:
        raise Http404("No such job.")
    evaluation = evaluation_of(job)
    # An unfinished evaluation shows as such, its figures to come.
    if not evaluates(job) or (job.finished and evaluation is None):
        raise Http404("This job has no evaluation to compare.")
    table = comparison(evaluation) if evaluation else None
    labels = [row["label"] for row in table.rows] if table else []
    context = {"job": job, "comparison": table, "votes": pair_counts(labels)}
    return render(request, "jobs/compare.html", context)


def navigation(request: HttpRequest) -> dict:
    """Context processor: the Jobs link is for staff."""
    user = getattr(request, "user", None)
    return {"jobs_enabled": bool(user and user.is_authenticated and user.is_staff)}
