import type { AllMiddlewareArgs, SlackViewMiddlewareArgs, ViewSubmitAction } from '@slack/bolt';
import type { SlackDeps } from '../../src/slack/deps.js';
import { answerStartSubmission } from '../../src/slack/startModal.js';
import { replyForError } from '../reply.js';

/** A submission of the start form or of its plan view: answered with the plan, the start, or the refusals on their fields. */
export function startSubmission(deps: SlackDeps) {
  return async ({ ack, body, view, client, logger }: AllMiddlewareArgs & SlackViewMiddlewareArgs<ViewSubmitAction>): Promise<void> => {
    const submission = {
      callbackId: view.callback_id, user: body.user.id, userName: body.user.name, values: view.state.values, privateMetadata: view.private_metadata, viewId: view.id,
    };
    // What can fail after the answer (telling the person, updating a view they closed) goes to Bolt's error handler.
    await answerStartSubmission(deps, client, submission, (response) => ack(response), (error) => replyForError(error, (m) => logger.error(m)));
  };
}
