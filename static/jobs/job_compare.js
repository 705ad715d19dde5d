// The job page's way to its figures: "Compare the variants" for a job that carries an
// evaluation (evaluate jobs, quantize jobs asked to evaluate), and "Evaluate against the
// base" for a finished quantize or finetune job, which queues an evaluate job and opens it.

import { apiPost } from '../lab/api.js';
import { jobUrl } from './job_format.js';

const hasEvaluation = (job) =>
  job.status === 'succeeded' && (job.kind === 'evaluate' || Boolean(job.result?.evaluation));

export class CompareActions {
  constructor(jobId, { row, link, button, onError }) {
    Object.assign(this, { jobId, row, link, button, onError });
    this.link.href = `/jobs/${encodeURIComponent(jobId)}/compare/`;
    this.button.addEventListener('click', () => this.evaluate());
  }

  update(job) {
    const succeeded = job.status === 'succeeded';
    this.link.hidden = !hasEvaluation(job);
    this.button.hidden = !(succeeded && (job.kind === 'quantize' || job.kind === 'finetune'));
    this.row.hidden = this.link.hidden && this.button.hidden;
  }

  async evaluate() {
    this.button.disabled = true;
    try {
      const queued = await apiPost(`/api/jobs/${encodeURIComponent(this.jobId)}/evaluate-against-base`, {});
      location.assign(jobUrl(queued.id));
    } catch (error) {
      this.onError(`Could not queue the evaluation: ${error.message}`);
      this.button.disabled = false;
    }
  }
}
