// One streamed chat completion with the official `openai` npm client, for
// the cut-stream tests: says CONTENT, prints each piece as "piece: <text>",
// then "done" (exit 0), or "error: <message>" (exit 1) when the stream fails.
//   NODE_PATH=<dir>/node_modules node openai_stream.cjs BASE_URL MODEL CONTENT
const OpenAI = require('openai');

async function main() {
	const [baseURL, model, content] = process.argv.slice(2);
	const client = new OpenAI({baseURL, apiKey: 'unused', maxRetries: 0, timeout: 20000});
	const s = await client.chat.completions.create({model, messages: [{role: 'user', content}], stream: true});
	for await (const ch of s) {
		const t = ch.choices[0] && ch.choices[0].delta && ch.choices[0].delta.content;
		if (t)
			console.log('piece: ' + t);
	}
	console.log('done');
}

main().catch((e) => {
	console.log('error: ' + (e && e.message));
	process.exit(1);
});
