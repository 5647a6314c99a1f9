// Package translate makes a Chat-Completions-only upstream (llama.cpp's server,
// vLLM, any OpenAI-compatible /v1/chat/completions) look like a Responses
// upstream.
//
// Requests go one way: [ToChat] turns a Responses request body (plus the
// already-expanded history of a previous_response_id chain) into a Chat
// Completions body, rejecting with a 400 what Chat cannot express and dropping
// what it does not need. Answers come back the other way: a [Stream] turns the
// `data:` payloads of a Chat stream into Responses SSE events — item ids that
// stay stable from added to done, sequence numbers, output and content
// indexes, and exactly one terminal event (docs/ARCHITECTURE.md, "The terminal-event rule") whatever the order of
// calls — and [FromChatResponse] does the same for a non-streamed
// chat.completion ([Stream.Completion] renders one as events).
//
// Everything here is pure and deterministic: no I/O, no goroutines, ids and
// the clock come in through the options.
//
// Mapping decisions, in one place:
//
//   - Roles. instructions and system messages become "system"; developer
//     messages become RequestOptions.DeveloperRole, "system" by default,
//     because llama.cpp and vLLM chat templates often reject "developer".
//   - Content. One text part becomes a plain string (what every template
//     handles); several become an array of text parts. input_image with an
//     image_url becomes an image_url part (user messages only); file_id images,
//     input_file and audio are rejected with the part's param.
//   - Assistant history. Output messages, function_call items and reasoning
//     items that follow each other form one assistant message: content,
//     refusal, tool_calls and reasoning_content. A reasoning item attaches to
//     the assistant message or tool call that follows it (or, failing that, to
//     the assistant message before it); its text is its reasoning_text content
//     or else its summary texts, joined by a blank line. encrypted_content
//     cannot be used by another model and is dropped.
//   - Tools. Function tools are kept (strict is forwarded only when sent);
//     every other tool type is dropped and reported in RequestInfo.DroppedTools.
//     A tool_choice that needs a dropped or unknown tool is a 400.
//   - Fields. See forwardedFields in request.go for the fields translated
//     into the Chat body and passthroughFields for those forwarded unchanged
//     (Chat Completions' and llama.cpp's and vLLM's sampling fields); the rest
//     are dropped (RequestInfo.DroppedFields), except background,
//     conversation, prompt and logprobs, which are rejected because dropping
//     them would silently change the answer. max_tool_calls is dropped: it
//     bounds calls to OpenAI's built-in tools, which a Chat upstream never
//     makes.
//   - Stream. delta.reasoning_content (or delta.reasoning) becomes a reasoning
//     item with one reasoning_text part; content a message item with an
//     output_text part (refusal a refusal part); tool calls function_call items.
//     One item is open at a time: a reasoning or message item is done when
//     something else starts; a tool call is done when text starts or the
//     next call starts once its own arguments are complete JSON, or at the
//     finish_reason (a call that starts while another is unfinished — Chat
//     may interleave them by index — waits, buffered, until it is done; so
//     does text that arrives while a call's arguments are incomplete, and it
//     follows the calls). Tool call deltas are matched by index, else by a
//     new id, else by a name other than the last call's (or the same name
//     once the last call's arguments are complete), else they continue the
//     last call; a delta with a new id and a name under the index of another
//     call (a name other than its, or the same once its arguments are
//     complete) starts a call of its own (servers that send every parallel
//     call as index 0), the other one done; a non-streamed message's calls
//     are matched by position.
//     A legacy function_call is one more tool call (its call id generated).
//     A tool call that ends without a name fails the response as the
//     upstream's server error (a whole chat.completion with one is not a
//     usable answer): it could be neither run nor sent back in history.
//     Content sent as an array of text parts is the parts' text, in order
//     (JoinParts gives it as one string, and its refusal parts as the refusal).
//     url_citation annotations (delta.annotations, message.annotations) are
//     the output_text part's, in the Responses shape (url, title, start_index,
//     end_index flat), each announced by output_text.annotation.added after
//     the text sent so far; those before any text wait for the next text
//     part; other kinds, and citations without a url, are not carried.
//     Text deltas are forwarded as the upstream's JSON literals, except that
//     a UTF-16 surrogate pair split across two deltas is joined in the
//     second, so the deltas and the done text agree for every client.
//     Echoed function tools carry strict (false when not sent) and parameters.
//     A Response object's error.code is one of the spec's ResponseErrorCode
//     values or an upstream code clients act on (ResponseErrorCode); any
//     other code becomes server_error and leads the message.
//     stop and tool_calls complete the response; length and content_filter
//     make it incomplete; abort and error fail it as a cut (finishOutcome);
//     an error chunk fails it (Stream.ErrorBeforeOutput keeps the
//     upstream's own error when nothing was output yet). A tool call
//     without arguments has "{}".
//     The response echoes the request's fields (RequestEcho) and has
//     completed_at once completed; metadata past OpenAI's limits is a 400.
//     A chat.completion answering a streaming request becomes the same
//     events (Stream.Completion).
package translate
