// The API token lives in sessionStorage: it survives a reload but not the closing of the tab,
// and it is never written anywhere else.
const key = "kollect.apiToken";

export function loadToken(): string | null {
  try {
    return sessionStorage.getItem(key);
  } catch {
    return null;
  }
}

export function saveToken(token: string): void {
  sessionStorage.setItem(key, token);
}

export function clearToken(): void {
  sessionStorage.removeItem(key);
}
