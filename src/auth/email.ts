/** The identity key that makes emails unique: "Ada@Example.com " and "ada@example.com" are one account. */
export const emailKey = (email: string): string => email.trim().normalize('NFC').toLowerCase()
