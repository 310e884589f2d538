// A real OpenID Connect provider for Handraise's sign-in tests: node-oidc-provider (a certified
// implementation) on 127.0.0.1, an ephemeral port, issuer http://localhost:<port>. Started once per test
// session by tests/harness/oidc.py, which reads the first line this prints: {"issuer": ..., "port": ...}.
//
// Accounts: whatever login is typed on the login page below is an account, and its sub. Login "alice" has email alice@example.org and name "Alice"; a login that starts with
// "unverified-" has an email the provider does not say it verified. Clients register themselves
// (dynamic client registration, POST /reg) with the redirect URI of the app a test starts.
import http from 'node:http';

import Provider from 'oidc-provider';

function account(id) {
  return {
    accountId: id,
    async claims() {
      return {
        sub: id,
        email: `${id}@example.org`,
        email_verified: !id.startsWith('unverified-'),
        name: id.charAt(0).toUpperCase() + id.slice(1),
      };
    },
  };
}

const configuration = {
  async findAccount(ctx, sub) {
    return account(String(sub));
  },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name'],
  },
  scopes: ['openid', 'email', 'profile'],
  features: {
    // The interaction pages are this script's own (below): devInteractions' page loads a web font from
    // the internet, and tests reach nothing beyond loopback.
    devInteractions: { enabled: false },
    registration: { enabled: true },
  },
  interactions: {
    url(ctx, interaction) {
      return `/interaction/${interaction.uid}`;
    },
  },
  // Every client must send PKCE (S256), confidential or public: the tests prove Handraise does.
  pkce: { required: () => true },
  // The tests' clients are first-party: no consent page, the requested scopes are granted.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) {
      return ctx.oidc.provider.Grant.find(grantId);
    }
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid email profile');
    await grant.save();
    return grant;
  },
  cookies: { keys: ['handraise-tests-only-cookie-key-0123456789'] },
};

const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function loginPage(uid) {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Test identity provider</title></head>
<body><h1>Test identity provider</h1>
<form method="post" action="/interaction/${escape(uid)}/login">
<p><label>Login <input name="login" required autofocus></label></p>
<p><label>Password <input type="password" name="password"></label></p>
<p><button type="submit">Sign in at the provider</button></p>
</form>
<p><a href="/interaction/${escape(uid)}/abort">Cancel</a></p>
</body></html>`;
}

async function readForm(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

// The interaction pages, as node-oidc-provider's own example mounts them: a login form, and cancel.
async function interaction(provider, req, res) {
  const [, , uid, action] = new URL(req.url, 'http://x').pathname.split('/');
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) {
    res.writeHead(400).end('not this interaction');
  } else if (req.method === 'GET' && !action) {
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store' });
    res.end(loginPage(uid));
  } else if (req.method === 'POST' && action === 'login') {
    const login = (await readForm(req)).get('login')?.trim().toLowerCase();
    if (!login) {
      res.writeHead(400).end('a login is needed');
      return;
    }
    await provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
  } else if (req.method === 'GET' && action === 'abort') {
    await provider.interactionFinished(req, res, {
      error: 'access_denied', error_description: 'End-User aborted interaction',
    }, { mergeWithLastSubmission: false });
  } else {
    res.writeHead(404).end();
  }
}

const server = http.createServer();
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const issuer = `http://localhost:${port}`;
  const provider = new Provider(issuer, configuration);
  const handle = provider.callback();
  server.on('request', (req, res) => {
    if (req.url.startsWith('/interaction/')) {
      interaction(provider, req, res).catch((error) => {
        res.writeHead(400).end(String(error?.message || error));
      });
    } else {
      handle(req, res);
    }
  });
  process.stdout.write(`${JSON.stringify({ issuer, port })}\n`);
});

// The harness ends the provider by closing its stdin (or with SIGTERM): nothing outlives the test session.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
process.on('SIGTERM', () => process.exit(0));
