/**
 * What every provider's settings share (docs/providers.md, "Configuration"): the environment they
 * are read from, the error that names the variable at fault, and secrets read inline or from a
 * file. Each provider reads its own variables in its folder (src/providers/<provider>/settings.ts).
 */

/** What configuration reads: the process's environment, or a test's. */
export type ProviderEnvironment = Readonly<Record<string, string | undefined>>;

export class ProviderConfigurationError extends Error {
  constructor(
    /** The variable at fault. */
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message} (docs/providers.md, "Configuration")`);
  }
}

/** Reads a file a setting names (a secret store's mount); a test passes its own. */
export type ReadSettingFile = (path: string) => string;

/**
 * A secret from `NAME` or from the file `NAME_FILE` (the form a secret store mounts), never both:
 * two sources would leave the reader guessing which one is used. A file's trailing newline is not
 * part of the secret.
 */
export function secretSetting(env: ProviderEnvironment, name: string, readFile: ReadSettingFile): string | undefined {
  const inline = env[name];
  const file = env[`${name}_FILE`];
  if (inline !== undefined && inline !== '' && file !== undefined && file !== '') {
    throw new ProviderConfigurationError(name, `set either ${name} or ${name}_FILE, not both`);
  }
  if (file !== undefined && file !== '') {
    let text: string;
    try {
      text = readFile(file);
    } catch (error) {
      throw new ProviderConfigurationError(`${name}_FILE`, `cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
    const value = text.replace(/\r?\n$/, '');
    if (value === '') throw new ProviderConfigurationError(`${name}_FILE`, `${file} is empty`);
    return value;
  }
  return inline === '' ? undefined : inline;
}
