// Drives an OpenAI-compatible endpoint with the official `openai` npm client:
// one chat completion, one streamed chat completion, the model list.
//   NODE_PATH=<dir>/node_modules node openai_client.cjs BASE_URL MODEL
// Prints "plain: <text>", "stream: <text> chunks: <n>", "models: a,b"; exits 1
// with "error: <message>" on any failure.
const OpenAI = require('openai');

async function main() {
	const [baseURL, model] = process.argv.slice(2);
	const client = new OpenAI({baseURL, apiKey: 'unused', maxRetries: 0, timeout: 20000});
	const messages = [{role: 'user', content: 'hi'}];
	const r = await client.chat.completions.create({model, messages});
	console.log('plain: ' + r.choices[0].message.content);
	const s = await client.chat.completions.create({model, messages, stream: true});
	let text = '', n = 0;
	for await (const ch of s) {
		text += (ch.choices[0] && ch.choices[0].delta && ch.choices[0].delta.content) || '';
		n++;
	}
	console.log('stream: ' + text + ' chunks: ' + n);
	const m = await client.models.list();
	console.log('models: ' + m.data.map((x) => x.id).join(','));
}

main().catch((e) => {
	console.log('error: ' + (e && e.message));
	process.exit(1);
});
